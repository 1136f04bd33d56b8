// Package allocreport is the codec of the REAL report, the payload in which
// an Android VM sends its allocation tracker's records (docs/protocol.md at
// the repository root, section 6).
//
// Parse decodes a payload exactly as ddmlib's AllocationsParser does (same
// records, same allocation numbers, same dotted names), but refuses
// malformed input with a *ParseError instead of reading past it, and keeps
// frames as table indices so that a parse allocates about as much as the
// payload it reads. Encode and Builder write the layout ART writes;
// AppendJSON writes one record as a JSON line. It knows nothing of
// counting, devices, logging or metrics.
package allocreport
