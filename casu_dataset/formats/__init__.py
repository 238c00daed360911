"""The files of a built dataset and of a library's lock, read by every stage above: the reader and
its column schema, the loader (`casu_dataset.load`), the build record and the realization lock."""
