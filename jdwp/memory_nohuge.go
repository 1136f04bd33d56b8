//go:build unix && !linux

package jdwp

// adviseHuge does nothing where there is no madvise(MADV_HUGEPAGE).
func adviseHuge(p []byte) {}
