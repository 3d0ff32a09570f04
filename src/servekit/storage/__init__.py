"""URI-addressed storage: one API (:class:`ObjectStorage`), on fsspec (:class:`Storage`): plain paths and
file:// built in; memory://, s3:// etc. with their extras. ``servekit.testing.InMemoryStorage`` is the fake."""

from servekit.storage.api import FileInfo, ObjectStorage, join
from servekit.storage.fs import Storage

__all__ = ["FileInfo", "ObjectStorage", "Storage", "join"]
