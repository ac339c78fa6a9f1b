"""Crash harness: a writer subprocess killed at random moments, and checks of the reopened store."""
