"""Offline preprocessing for EAST: UFO JSON + images -> a cache of fixed-size training records."""
