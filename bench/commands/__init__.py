"""commands: one module per subcommand (HELP, add_arguments, main); only bench.cli imports them.

Options come from typed dataclasses (bench.core.options); a command turns
them into configs, calls a job or an experiment, and renders the record.
Commands do not import each other (an import-linter contract).
"""
