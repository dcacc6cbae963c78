"""Insights derived from the stored lines: queries by fingerprint, findings with fixes, alerts.

Reads what the store holds and writes only its own tables (docs/insights.md). `engine.Insights`
follows the store behind a cursor; `alerts.AlertEvaluator` evaluates the `[[alerts]]` rules.
"""
