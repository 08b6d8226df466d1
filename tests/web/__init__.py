"""The web view and the report."""
