"""dsptrain: integer training on phones, with Hexagon DSP offload."""
__version__ = "0.1.0"
