"""sbr: source-based routing. Each pod address gets its own routing table (from 100 up) and a rule
``from <address> lookup <table>``, so replies leave through the interface that owns the address;
the interface's main-table routes move into those tables.

The plugin is plugin.py (PLUGIN); the other modules are its parts.
"""
