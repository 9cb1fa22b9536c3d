__version__ = "0.2.0"


__all__ = ["__version__"]
