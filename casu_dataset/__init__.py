"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""
__version__ = "0.1.0"
