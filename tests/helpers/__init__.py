"""Helpers shared by the tests: small images, small encoders and vectors, processes
started and killed with bounded waits, the headless browser."""
