"""Test support: real servers and emulators the tests run against (never mocks of our own code)."""
