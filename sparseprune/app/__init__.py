"""The application around the pruning: the training task, its Lightning callback, and the entry points'
command-line plumbing (clear errors, config choices, console, run folders)."""
