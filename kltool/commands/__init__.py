"""Thin click adapters: options → a core call → output. No byte parsing here."""
