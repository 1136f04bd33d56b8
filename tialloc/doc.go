// Package tialloc reads the logs of tiallocsample, the JVMTI allocation
// agent in AOSP's ART repository (tools/jvmti-agents/ti-alloc-sample/).
// The agent logs one VMObjectAlloc event in every N per thread, each with
// its thread, class, size and stack, into a text file with a light form of
// compression:
//
//	+0,jthread[main], jclass[[I file: <UNKNOWN_FILE>], size[24, hex: 0x18]
//	+1,Lcom/example/Main;::main([Ljava/lang/String;)V
//	+2,Lcom/example/Main;::fill(I)V
//	=3,0;1;2
//	3
//	3
//
// A "+" line defines a key: key 0 above is an allocation (thread, class and
// size), the others are stack frames. An "=" line defines a stack trace:
// an allocation key, then frame keys from the outermost frame to the
// allocating one. Every other line is one sample, the key of a stack trace.
// Keys count up from 0, shared by both kinds of definition, and each is
// defined on first use, so a definition always comes before its use.
//
// Frames come in two layouts, told apart by content. Every released agent
// (Android 11 and later) writes the declaring class's signature before the
// method, "Lpkg/Cls;::name(sig)", and "ERROR" for a method it could not
// name. The agent's README (and its development versions of November 2019,
// never released) shows frames without the class, "name(sig)", and
// "METHODERROR". Both are read. The first development version wrote a
// third layout, "#N(VMObjectAlloc(#0(jthread[...], ...))" with frames on
// indented lines; no release carries it, and Parse names it in its error.
//
// Parse reads a log as a stream: its memory is the distinct allocations,
// frames and stacks, not the samples. A malformed line is a *SyntaxError
// naming the file, the line and the problem; a reference to a key that is
// not defined, or defined as the other kind, is one too.
package tialloc
