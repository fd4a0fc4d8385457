"""The application: CLI, headless acceptance runner, scenes and the desktop UI."""
