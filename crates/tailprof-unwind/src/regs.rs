//! The user registers an unwind starts from, per architecture.

#[cfg(target_arch = "aarch64")]
pub(crate) mod arch {
    pub type NativeUnwinder<D> = framehop::aarch64::UnwinderAarch64<D>;
    pub type NativeCache = framehop::aarch64::CacheAarch64;
    /// perf register numbers (arch/arm64/include/uapi/asm/perf_regs.h): x29, lr, sp, pc.
    pub const REG_FP: u32 = 29;
    pub const REG_LR: u32 = 30;
    pub const REG_SP: u32 = 31;
    pub const REG_IP: u32 = 32;
    pub const REGS_MASK: u64 = 1 << REG_FP | 1 << REG_LR | 1 << REG_SP | 1 << REG_IP;
    pub fn regs(r: &super::UserRegs) -> framehop::aarch64::UnwindRegsAarch64 {
        framehop::aarch64::UnwindRegsAarch64::new(r.lr, r.sp, r.fp)
    }
}

#[cfg(not(target_arch = "aarch64"))]
pub(crate) mod arch {
    pub type NativeUnwinder<D> = framehop::x86_64::UnwinderX86_64<D>;
    pub type NativeCache = framehop::x86_64::CacheX86_64;
    /// perf register numbers (arch/x86/include/uapi/asm/perf_regs.h): bp, sp, ip.
    pub const REG_FP: u32 = 6;
    pub const REG_SP: u32 = 7;
    pub const REG_IP: u32 = 8;
    pub const REG_LR: u32 = u32::MAX;
    pub const REGS_MASK: u64 = 1 << REG_FP | 1 << REG_SP | 1 << REG_IP;
    pub fn regs(r: &super::UserRegs) -> framehop::x86_64::UnwindRegsX86_64 {
        framehop::x86_64::UnwindRegsX86_64::new(r.ip, r.sp, r.fp)
    }
}

/// `sample_regs_user` bits this architecture's unwinder needs (x86_64: bp, sp, ip;
/// aarch64: x29, lr, sp, pc).
pub const UNWIND_REGS_MASK: u64 = arch::REGS_MASK;

/// The user registers an unwind starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    /// Frame pointer (rbp / x29).
    pub fp: u64,
    /// Link register (aarch64 only; 0 elsewhere).
    pub lr: u64,
}

impl UserRegs {
    /// From a REGS_USER block: `mask` is the attr's `sample_regs_user`, `value(i)` the
    /// i-th word of the block. `None` if a needed register is missing.
    pub fn from_perf(mask: u64, value: impl Fn(usize) -> Option<u64>) -> Option<UserRegs> {
        let get = |reg: u32| -> Option<u64> {
            if reg >= 64 || mask & (1 << reg) == 0 {
                return None;
            }
            value((mask & ((1u64 << reg) - 1)).count_ones() as usize)
        };
        Some(UserRegs {
            ip: get(arch::REG_IP)?,
            sp: get(arch::REG_SP)?,
            fp: get(arch::REG_FP)?,
            lr: if arch::REG_LR == u32::MAX { 0 } else { get(arch::REG_LR)? },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regs_from_perf_mask() {
        let mask = UNWIND_REGS_MASK | 1; // plus ax
        let vals = [7u64, 10, 20, 30, 40];
        let r = UserRegs::from_perf(mask, |i| vals.get(i).copied()).unwrap();
        #[cfg(target_arch = "x86_64")]
        assert_eq!((r.fp, r.sp, r.ip), (10, 20, 30));
        assert!(UserRegs::from_perf(1, |i| vals.get(i).copied()).is_none());
    }
}
