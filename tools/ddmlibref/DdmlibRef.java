// DdmlibRef runs Google's ddmlib AllocationsParser on a REAL report, as a
// reference for alloctrack's own parser. It is our code; ddmlib itself is
// not part of this repository and is loaded from its jar at run time
// (Debian package libandroid-ddms-java):
//
//	javac -d OUT -cp /usr/share/java/com.android.tools.ddms.ddmlib.jar DdmlibRef.java
//	java -cp OUT:/usr/share/java/com.android.tools.ddms.ddmlib.jar DdmlibRef dump FILE
//	java -cp OUT:/usr/share/java/com.android.tools.ddms.ddmlib.jar DdmlibRef bench FILE [ITERATIONS]
//
// dump prints one JSON object per allocation, in ddmlib's array order, in
// exactly the form of Go's (*alloctrack.Report).AppendJSON (alloctrack/jsonl.go).
// bench times AllocationsParser.parse on the file.

import com.android.ddmlib.AllocationInfo;
import com.android.ddmlib.AllocationsParser;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;

public final class DdmlibRef {
    private DdmlibRef() {}

    public static void main(String[] args) throws IOException {
        if (args.length >= 2 && args[0].equals("dump") && args.length == 2) {
            dump(args[1]);
        } else if (args.length >= 2 && args[0].equals("bench") && args.length <= 3) {
            int n = args.length == 3 ? Integer.parseInt(args[2]) : 50;
            if (n < 1) {
                usage();
            }
            bench(args[1], n);
        } else {
            usage();
        }
    }

    private static void usage() {
        System.err.println("usage: DdmlibRef dump FILE | DdmlibRef bench FILE [ITERATIONS]");
        System.exit(2);
    }

    // ---- dump ----

    private static void dump(String file) throws IOException {
        byte[] payload = Files.readAllBytes(Paths.get(file));
        AllocationInfo[] infos = AllocationsParser.parse(ByteBuffer.wrap(payload));
        Utf8Buf buf = new Utf8Buf(1 << 16);
        OutputStream out = new BufferedOutputStream(System.out, 1 << 16);
        for (AllocationInfo a : infos) {
            buf.len = 0;
            buf.ascii("{\"num\":").ascii(Integer.toString(a.getAllocNumber()));
            buf.ascii(",\"class\":").jsonString(a.getAllocatedClass());
            buf.ascii(",\"size\":").ascii(Long.toString(a.getSize() & 0xffffffffL));
            buf.ascii(",\"thread\":").ascii(Integer.toString(a.getThreadId() & 0xffff));
            buf.ascii(",\"frames\":[");
            StackTraceElement[] st = a.getStackTrace();
            for (int j = 0; j < st.length; j++) {
                StackTraceElement f = st[j];
                if (j > 0) {
                    buf.ascii(",");
                }
                String fileName = f.getFileName();
                buf.ascii("{\"class\":").jsonString(f.getClassName());
                buf.ascii(",\"method\":").jsonString(f.getMethodName());
                buf.ascii(",\"file\":").jsonString(fileName == null ? "" : fileName);
                buf.ascii(",\"line\":").ascii(Integer.toString(f.getLineNumber()));
                buf.ascii("}");
            }
            buf.ascii("]}\n");
            out.write(buf.b, 0, buf.len);
        }
        out.flush();
    }

    /** A growable byte buffer that writes Java strings as UTF-8. */
    private static final class Utf8Buf {
        byte[] b;
        int len;

        Utf8Buf(int cap) {
            b = new byte[cap];
        }

        private void ensure(int extra) {
            if (len + extra > b.length) {
                b = Arrays.copyOf(b, Math.max(b.length * 2, len + extra));
            }
        }

        private void put(int c) {
            b[len++] = (byte) c;
        }

        /** Appends s, which must be ASCII, verbatim. */
        Utf8Buf ascii(String s) {
            ensure(s.length());
            for (int i = 0; i < s.length(); i++) {
                put(s.charAt(i));
            }
            return this;
        }

        /**
         * Appends s quoted as Go's appendJSONString does: '"' and '\\' escaped
         * with a backslash, characters below 0x20 as \\u00XX (lowercase hex),
         * everything else raw, as UTF-8. A lone surrogate cannot be UTF-8; it
         * is written as U+FFFD, which is what Go's utf16.Decode makes of it.
         */
        Utf8Buf jsonString(String s) {
            ensure(2 + 6 * s.length());
            put('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                if (c < 0x80) {
                    if (c == '"' || c == '\\') {
                        put('\\');
                        put(c);
                    } else if (c < 0x20) {
                        put('\\');
                        put('u');
                        put('0');
                        put('0');
                        put(HEX[c >> 4]);
                        put(HEX[c & 0xf]);
                    } else {
                        put(c);
                    }
                } else if (c < 0x800) {
                    put(0xc0 | (c >> 6));
                    put(0x80 | (c & 0x3f));
                } else if (Character.isHighSurrogate(c) && i + 1 < s.length()
                        && Character.isLowSurrogate(s.charAt(i + 1))) {
                    int cp = Character.toCodePoint(c, s.charAt(i + 1));
                    i++;
                    put(0xf0 | (cp >> 18));
                    put(0x80 | ((cp >> 12) & 0x3f));
                    put(0x80 | ((cp >> 6) & 0x3f));
                    put(0x80 | (cp & 0x3f));
                } else {
                    int cp = Character.isSurrogate(c) ? 0xfffd : c;
                    put(0xe0 | (cp >> 12));
                    put(0x80 | ((cp >> 6) & 0x3f));
                    put(0x80 | (cp & 0x3f));
                }
            }
            put('"');
            return this;
        }

        private static final char[] HEX = "0123456789abcdef".toCharArray();
    }

    // ---- bench ----

    private static long checksum(AllocationInfo[] infos) {
        long sum = infos.length;
        for (AllocationInfo a : infos) {
            StackTraceElement[] st = a.getStackTrace();
            sum = sum * 31 + a.getAllocNumber() + (a.getSize() & 0xffffffffL) + (a.getThreadId() & 0xffff)
                    + a.getAllocatedClass().length() + st.length;
            if (st.length > 0) {
                sum += st[st.length - 1].getLineNumber() + st[0].getMethodName().length();
            }
        }
        return sum;
    }

    private static void bench(String file, int iterations) throws IOException {
        byte[] payload = Files.readAllBytes(Paths.get(file));
        final int warmup = 30;
        long check = 0;
        for (int i = 0; i < warmup; i++) {
            check += checksum(AllocationsParser.parse(ByteBuffer.wrap(payload)));
        }

        java.lang.management.ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        com.sun.management.ThreadMXBean smx = null;
        if (mx instanceof com.sun.management.ThreadMXBean) {
            smx = (com.sun.management.ThreadMXBean) mx;
            if (!smx.isThreadAllocatedMemorySupported()) {
                smx = null;
            } else if (!smx.isThreadAllocatedMemoryEnabled()) {
                smx.setThreadAllocatedMemoryEnabled(true);
            }
        }
        long tid = Thread.currentThread().getId();

        long[] ns = new long[iterations];
        long allocated = 0;
        for (int i = 0; i < iterations; i++) {
            long a0 = smx != null ? smx.getThreadAllocatedBytes(tid) : 0;
            long t0 = System.nanoTime();
            AllocationInfo[] infos = AllocationsParser.parse(ByteBuffer.wrap(payload));
            long t1 = System.nanoTime();
            long a1 = smx != null ? smx.getThreadAllocatedBytes(tid) : 0;
            ns[i] = t1 - t0;
            allocated += a1 - a0;
            // Outside the timed region, but it uses every result, so the
            // parse cannot be optimised away.
            check += checksum(infos);
        }
        long[] sorted = ns.clone();
        Arrays.sort(sorted);
        double medianNs = iterations % 2 == 1
                ? sorted[iterations / 2]
                : (sorted[iterations / 2 - 1] + sorted[iterations / 2]) / 2.0;
        double minNs = sorted[0];
        double mbps = payload.length / (medianNs / 1e9) / 1e6;
        System.out.printf(java.util.Locale.ROOT,
                "ddmlib AllocationsParser: %d iterations, median %.3f ms, min %.3f ms, %.2f MB/s%n",
                iterations, medianNs / 1e6, minNs / 1e6, mbps);
        System.out.printf(java.util.Locale.ROOT, "ddmlib input: %s, %d bytes, %d warm-up parses%n",
                file, payload.length, warmup);
        if (smx != null) {
            System.out.printf(java.util.Locale.ROOT, "ddmlib allocated: %d B/parse%n", allocated / iterations);
        } else {
            System.out.println("ddmlib allocated: unavailable");
        }
        System.out.printf(java.util.Locale.ROOT, "ddmlib checksum: %d%n", check);
    }
}
