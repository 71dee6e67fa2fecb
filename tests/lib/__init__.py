"""Helpers shared by the tests: process control, the Pulumi mock harness, emulator stacks."""
