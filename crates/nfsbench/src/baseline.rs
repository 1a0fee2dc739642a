//! The ceiling: one loopback TCP stream (std threads, 1 MiB writes and reads, data
//! dropped), moving the same number of bytes as a READ of the test file. Both ends
//! are this process, so its CPU (`RUSAGE_SELF`) is the whole cost; it is reported as
//! client CPU with server CPU 0.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use crate::cpu::Meter;
use crate::workload::Sample;

/// Sends `bytes` over one loopback TCP connection and measures it.
pub fn tcp_stream(bytes: u64) -> std::io::Result<Sample> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let meter = Meter::start(None, false);
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut s = TcpStream::connect(addr)?;
        let buf = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            s.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let (mut r, _) = listener.accept()?;
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    sender
        .join()
        .map_err(|_| std::io::Error::other("sender thread panicked"))??;
    Ok(Sample {
        amount: got,
        m: meter.stop(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn moves_every_byte() {
        let s = super::tcp_stream(3 << 20).unwrap();
        assert_eq!(s.amount, 3 << 20);
    }
}
