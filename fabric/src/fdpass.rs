//! Passing a shared-memory ring between processes as a file descriptor, with no name on any file system: a
//! sealed `memfd_create(2)` file, sent with `SCM_RIGHTS` (unix(7), "Ancillary messages") in the same `sendmsg`
//! as the subscribe frame, over the publisher's Unix-domain control socket. The receiver gets its own descriptor
//! of the same file; nobody else can open it (there is no path), so a ring owned by one user (a strategy) can be
//! written by a publisher running as another, with no file mode to open up and nothing another local user could
//! name, replace or truncate (`F_SEAL_SHRINK`).
//!
//! Linux only (memfd, seals, `MSG_CMSG_CLOEXEC`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Most descriptors taken from one `recvmsg`: a subscribe frame carries one; a peer sending more has them
/// closed (received, then dropped) and is refused by the caller.
pub const MAX_FDS: usize = 4;

/// A new anonymous file (`memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)`), empty, owned by this process's
/// user.
///
/// # Errors
/// The OS error (`EMFILE`, `ENOMEM`, ...).
pub fn memfd(name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and outlives the call; the flags are valid for memfd_create.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Seals `file` (a memfd) so its size never changes again: `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`.
///
/// # Errors
/// The OS error (`EPERM` for a file created without `MFD_ALLOW_SEALING`).
pub fn seal_size(file: &File) -> io::Result<()> {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl(F_ADD_SEALS) on a descriptor we own, with an int argument.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The seals of `file` (`F_GET_SEALS`; 0 for a file that cannot be sealed, whose fcntl fails with `EINVAL`).
///
/// # Errors
/// Another OS error.
pub fn seals(file: &File) -> io::Result<libc::c_int> {
    // SAFETY: fcntl(F_GET_SEALS) on a descriptor we own takes no argument.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EINVAL) { Ok(0) } else { Err(e) };
    }
    Ok(rc)
}

/// Sends `bytes` on `sock` with `fd` attached (`SCM_RIGHTS`) to the first byte, then whatever the first
/// `sendmsg` did not take with plain writes. Blocks as the socket does.
///
/// # Errors
/// The OS error of `sendmsg` or a later write.
pub fn send_with_fd(sock: &UnixStream, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: CMSG_SPACE is a pure computation on a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: a zeroed msghdr is a valid empty header; every pointer set below points into live buffers
    // (`iov`, `control`) that outlive the sendmsg call; the cmsg written is one SCM_RIGHTS header with one int,
    // inside `control` (its size is CMSG_SPACE of one int).
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::c_int, fd.as_raw_fd());
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut rest = &bytes[sent as usize..];
    while !rest.is_empty() {
        match io::Write::write(&mut &*sock, rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads from `sock` into `buf` (`recvmsg`, with `MSG_CMSG_CLOEXEC`), taking the descriptors that came with the
/// bytes (`SCM_RIGHTS`) into `fds`: at most [`MAX_FDS`] per call (the kernel closes what does not fit). Returns
/// the bytes read (0: the peer closed). Blocks or not as the socket does.
///
/// # Errors
/// The OS error (`WouldBlock` on a non-blocking socket with nothing to read).
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    // SAFETY: CMSG_SPACE is a pure computation on a size.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<libc::c_int>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: a zeroed msghdr is a valid empty header; its pointers are set to live buffers (`iov` over `buf`,
    // `control`) that outlive the call; recvmsg writes at most `buf.len()` bytes and `space` control bytes.
    let (got, msg) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        let got = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        (got, msg)
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `msg` was filled in by recvmsg: its control pointer and length describe the control messages it
    // wrote into `control` (still alive); CMSG_FIRSTHDR/CMSG_NXTHDR walk only inside that length, and each
    // SCM_RIGHTS message's data holds (cmsg_len - CMSG_LEN(0)) / sizeof(int) descriptors the kernel installed
    // for this process, which nothing else owns.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const libc::c_int;
                let n = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<libc::c_int>();
                for k in 0..n {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(got as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "sockets and memfd")]
    fn a_sealed_memfd_passed_over_a_socket_is_the_same_file_and_cannot_shrink() {
        let fd = memfd(c"mdfan-test").unwrap();
        let file = File::from(fd);
        file.set_len(4096).unwrap();
        seal_size(&file).unwrap();
        assert!(file.set_len(0).is_err(), "sealed against shrinking");
        let (a, b) = UnixStream::pair().unwrap();
        send_with_fd(&a, b"hello", std::os::fd::AsFd::as_fd(&file)).unwrap();
        let (mut buf, mut fds) = ([0u8; 16], Vec::new());
        let n = recv_with_fds(&b, &mut buf, &mut fds).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 1));
        let got = File::from(fds.pop().unwrap());
        assert_eq!(got.metadata().unwrap().len(), 4096);
        let want = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        assert_eq!(seals(&got).unwrap() & want, want);
        // plain bytes carry no descriptor
        io::Write::write_all(&mut &a, b"x").unwrap();
        let n = recv_with_fds(&b, &mut buf, &mut fds).unwrap();
        assert_eq!((n, fds.len()), (1, 0));
    }
}
