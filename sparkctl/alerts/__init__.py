"""On-call: where each failure's runbook lives, and the Prometheus alerting rules that link to them.

runbooks.py   the runbook for a doctor result or an alert (docs/runbooks/)
rules.py      the alerting rules for an inventory's cluster (model + thresholds)
render.py     rules -> Prometheus rule-file YAML
"""
