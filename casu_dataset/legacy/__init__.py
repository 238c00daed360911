"""CASU-mini v1 (88 scenes with free questions, superseded by contrast families): its library compiler.
Nothing in the v2 pipeline imports it; the CLI uses it when a v1 library folder is given."""
