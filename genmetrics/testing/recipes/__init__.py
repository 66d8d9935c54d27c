"""Test inputs per built-in family: ``genmetrics.testing.recipes.<family>.RECIPES = {metric: callable}``.

Each callable returns ``{"kwargs": {create_metric kwargs with tiny backbones}, "updates": [{reference=...,
candidates=..., condition=...}, ...]}``; :func:`genmetrics.testing.metric_recipe` finds them.
"""
