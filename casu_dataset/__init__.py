"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""
__version__ = "0.2.0"
