from forwarder.cli import main

raise SystemExit(main())
