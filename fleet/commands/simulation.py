"""Placeholder until this area's issue lands its commands."""

import click


def register(group: click.Group) -> None:
    del group
