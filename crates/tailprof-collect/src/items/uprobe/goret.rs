//! Return instructions of a function, for `--item-end BIN:FUNC%return` on a Go binary
//! (issue 22 part 4).
//!
//! A uretprobe replaces the return address on the stack with a trampoline's. The Go
//! runtime copies a goroutine's stack when it grows (and the garbage collector scans it,
//! and panics unwind it): a goroutine whose frame holds the trampoline's address instead
//! of its caller's crashes the program or returns into the wrong place. So on a Go
//! binary the end probe is an ordinary entry uprobe on each `RET` instruction of the
//! function: it fires at the same moment (the function is leaving) and changes nothing
//! on the stack.
//!
//! The function's bytes (`st_size` of its symbol, at most [`MAX_FUNCTION_BYTES`]) are
//! decoded from its first byte with `iced-x86`'s decoder. Refused, with the reason:
//! not x86-64, a size of 0 (unknown), an undecodable instruction (the bytes are not
//! straight-line code from the symbol), no `RET` at all, or a direct jump out of the
//! function (a tail call: the function would leave without passing a `RET`).

use iced_x86::{Code, Decoder, DecoderOptions, Mnemonic, OpKind};

/// Largest function decoded (Go's largest functions are tens of KiB).
pub const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// Why the return instructions of a function cannot be probed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetError {
    #[error("return-instruction probes need an x86-64 binary (e_machine {0})")]
    NotX86_64(u16),
    #[error("the symbol's size is unknown (st_size 0)")]
    SizeUnknown,
    #[error("the function is {0} bytes, over the {MAX_FUNCTION_BYTES}-byte limit")]
    TooLarge(u64),
    #[error("undecodable instruction at {0:#x}")]
    Undecodable(u64),
    #[error("no RET instruction found")]
    NoRet,
    #[error("a direct jump at {at:#x} leaves the function (to {target:#x}): a tail call would pass no RET")]
    TailJump { at: u64, target: u64 },
}

/// Virtual addresses of the `RET` instructions in `code`, the bytes of a function
/// starting at virtual address `addr`, in address order.
pub fn ret_addresses(code: &[u8], addr: u64) -> Result<Vec<u64>, RetError> {
    if code.is_empty() {
        return Err(RetError::SizeUnknown);
    }
    if code.len() as u64 > MAX_FUNCTION_BYTES {
        return Err(RetError::TooLarge(code.len() as u64));
    }
    let end = addr.saturating_add(code.len() as u64);
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut rets = Vec::new();
    while d.can_decode() {
        let insn = d.decode();
        if insn.code() == Code::INVALID {
            // Bytes after the last instruction that do not form one (cut at st_size).
            return Err(RetError::Undecodable(insn.ip()));
        }
        if insn.mnemonic() == Mnemonic::Ret {
            rets.push(insn.ip());
        }
        // A direct jump or conditional branch (a call returns; indirect jumps, e.g. a
        // switch's jump table, have no target here).
        if insn.mnemonic() != Mnemonic::Call
            && matches!(insn.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
        {
            let target = insn.near_branch_target();
            if target < addr || target >= end {
                return Err(RetError::TailJump { at: insn.ip(), target });
            }
        }
    }
    if rets.is_empty() {
        return Err(RetError::NoRet);
    }
    Ok(rets)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `go build` of `func slow(w http.ResponseWriter, r *http.Request)`-like code,
    /// shortened: the stack-check prologue, a frame, a call, two returns.
    ///
    /// ```text
    /// 0x1000 49 3b 66 10           cmp  rsp, [r14+0x10]
    /// 0x1004 76 1a                 jbe  0x1020
    /// 0x1006 55                    push rbp
    /// 0x1007 48 89 e5              mov  rbp, rsp
    /// 0x100a 48 85 c0              test rax, rax
    /// 0x100d 74 02                 je   0x1011
    /// 0x100f 5d                    pop  rbp
    /// 0x1010 c3                    ret
    /// 0x1011 e8 ea ef ff ff        call 0x0000   (another function: calls are fine)
    /// 0x1016 5d                    pop  rbp
    /// 0x1017 c3                    ret
    /// 0x1018 cc*8                  int3 padding
    /// 0x1020 e8 db ef ff ff        call 0x0000   (runtime.morestack_noctxt)
    /// 0x1025 eb d9                 jmp  0x1000
    /// ```
    const GO_LIKE: &[u8] = &[
        0x49, 0x3b, 0x66, 0x10, 0x76, 0x1a, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x85, 0xc0, 0x74, 0x02, 0x5d, 0xc3, 0xe8, 0xea, 0xef, 0xff, 0xff,
        0x5d, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xe8, 0xdb, 0xef, 0xff, 0xff, 0xeb, 0xd9,
    ];

    #[test]
    fn finds_every_ret_and_not_c3_bytes_inside_instructions() {
        assert_eq!(ret_addresses(GO_LIKE, 0x1000).unwrap(), [0x1010, 0x1017]);
        // 0xc3 as an operand byte is no RET: mov eax, 0xc3c3c3c3; ret imm16 is one.
        let code = [0xb8, 0xc3, 0xc3, 0xc3, 0xc3, 0xc2, 0x08, 0x00];
        assert_eq!(ret_addresses(&code, 0x400).unwrap(), [0x405]);
        // A rep ret (f3 c3) is a RET at its first byte.
        assert_eq!(ret_addresses(&[0x90, 0xf3, 0xc3], 0).unwrap(), [1]);
    }

    #[test]
    fn refuses_what_it_cannot_probe() {
        assert_eq!(ret_addresses(&[], 0x1000), Err(RetError::SizeUnknown));
        // No RET: a function ending in a call to a function that does not return.
        assert_eq!(ret_addresses(&[0x55, 0xe8, 0, 0, 0, 0, 0xcc], 0x1000), Err(RetError::NoRet));
        // A tail call: jmp rel32 out of the function.
        assert_eq!(
            ret_addresses(&[0x48, 0x85, 0xc0, 0x75, 0x01, 0xc3, 0xe9, 0x00, 0x10, 0, 0], 0x1000),
            Err(RetError::TailJump { at: 0x1006, target: 0x200b })
        );
        // Cut inside an instruction.
        assert_eq!(ret_addresses(&GO_LIKE[..3], 0x1000), Err(RetError::Undecodable(0x1000)));
        let big = vec![0x90u8; (MAX_FUNCTION_BYTES + 1) as usize];
        assert!(matches!(ret_addresses(&big, 0), Err(RetError::TooLarge(_))));
    }
}
