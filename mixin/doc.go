// Package mixin holds alloctrack's Grafana dashboards (dashboards/*.json)
// and Prometheus rules (rules/*.yml, unit tests in tests/) and reads them:
// the panels and queries of a dashboard, its template variables, Grafana's
// variable substitution, and the metric and label names a PromQL query
// refers to. The tests of this package check the files' structure and run
// promtool; the end-to-end tests run every query against a real
// Prometheus scraping a real daemon (see README.md).
package mixin
