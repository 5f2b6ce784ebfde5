"""The guardian: one long-lived daemon per (principal, workspace) that owns the PTYs.

It never imports :mod:`frontend`; it talks to front-ends only through :mod:`protocol`.
"""
