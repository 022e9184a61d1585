"""The per-exec entry points (the C forwarder and its Python form) and their installer."""
