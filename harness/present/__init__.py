"""Presentation: console tables, the HTML/Markdown report, pytest failure text."""
