"""The catalog's tables by subject, each module over the Catalog's connection and transactions."""
