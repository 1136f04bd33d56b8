//go:build !unix

package jdwp

// allocMemory has no anonymous memory maps to give where the system has
// none: Buffers then uses Go heap.
func allocMemory(n int, huge bool) ([]byte, bool) { return nil, false }

// freeMemory is never called without maps.
func freeMemory(p []byte) {}
