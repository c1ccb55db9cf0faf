"""kltool.storage.check."""
