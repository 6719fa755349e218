"""Workload readers: each turns a source (synthetic mix, SWIM, openb, a user file) into model jobs."""
