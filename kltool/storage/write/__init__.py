"""kltool.storage.write."""
