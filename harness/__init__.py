"""CASU evaluation harness."""
