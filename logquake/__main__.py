from logquake.cli import main

raise SystemExit(main())
