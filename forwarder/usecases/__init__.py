"""Use cases, one module each: the API, the pages, the CLI and the config sync call them, never a copy."""
