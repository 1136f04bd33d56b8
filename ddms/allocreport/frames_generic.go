//go:build !amd64 || purego

package allocreport

// checkFrames reports the index in allocs of the first entry whose frames
// at base+off have an index above its limit in lim, or -1. The frames must
// lie within the payload base points into.
func checkFrames(base *byte, allocs []Allocation, lim *[8]uint16) int {
	return checkFramesGo(base, allocs, lim)
}
