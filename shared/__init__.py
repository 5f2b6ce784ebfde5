"""Code both the guardian and the front-end need: paths, identities, config, the catalog."""
