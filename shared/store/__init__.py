"""The guardian's storage: the catalog's schema and migrations, one module per table family,
the checkpointer, and the read-only view for whoever has no live guardian.

Every SQL statement of the project lives in this package. The guardian writes its catalog
through ``catalog.Catalog`` (and ``agents.AgentStore`` over it); a person's commands and a
front-end that finds no live guardian read it through ``view``, which never creates,
migrates, writes or chmods it. Nothing is imported here: importing ``view`` alone keeps a
person's command light.
"""
