"""Ingest: UFO JSON read one image entry at a time, word rules applied, images decoded (EXIF-aware)."""
