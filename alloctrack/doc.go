// Package alloctrack turns Android allocation-tracker reports into
// allocation records.
//
// This file set implements the REAL report (docs/protocol.md at the
// repository root, section 6): Parse decodes the payload of a REAL reply exactly as ddmlib's
// AllocationsParser does (same records, same allocation numbers, same dotted
// names), but refuses malformed input with a *ParseError instead of reading
// past it, and keeps frames as table indices so that a parse allocates about
// as much as the payload it reads. Encode writes the layout ART writes.
package alloctrack
