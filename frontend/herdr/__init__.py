"""The Herdr adapter (docs/tools.md#herdr-backend): the operator's configuration and bindings,
and Herdr's CLI run once per call with literal arguments, bounded output and a deadline."""
