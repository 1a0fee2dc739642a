# Prints the 16 counters of clk.so's count file.
import struct
import sys

print(' '.join(str(x) for x in struct.unpack('16Q', open(sys.argv[1], 'rb').read()[:128])))
