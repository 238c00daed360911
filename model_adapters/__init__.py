"""Model adapters behind one small interface."""
