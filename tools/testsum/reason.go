package main

import "strings"

// skipReason is what a skipped test printed (its t.Skip message, with
// the file and line), without test2json's framing lines, on one line.
func skipReason(output []string) string {
	var parts []string
	for _, o := range output {
		for _, line := range strings.Split(o, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- SKIP") {
				continue
			}
			parts = append(parts, line)
		}
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}
