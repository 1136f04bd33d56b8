// Package ddms gives meaning to the DDM chunks Android VMs exchange over JDWP.
//
// A DDM packet is a JDWP command with command set 0xC7 and command 0x01 whose
// data is exactly one chunk: a four-letter type, a length, and that many bytes
// (docs/protocol.md at the repository root, section 5). This package encodes and decodes the
// chunk header and the payloads the project uses (HELO, FEAT, APNM, WAIT,
// REAE, REAQ, REAL, HPIF, FAIL), turns a FAIL chunk into *FailError, and offers
// a Client that talks to a small Transport interface rather than to a
// particular JDWP implementation. It knows nothing of adb, logging or metrics;
// the REAL report's own layout is decoded by package allocreport.
package ddms
