"""kltool.storage.change."""
