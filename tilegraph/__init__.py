"""tilegraph: a compiler IR and scheduler for deep-learning graphs."""
__version__ = "0.1.0"
