from forwarder.entry import main

raise SystemExit(main())
