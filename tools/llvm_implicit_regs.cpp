// Print every AMDGPU instruction of LLVM's TableGen'd instruction info with
// the registers it uses and defines implicitly (MCInstrDesc::implicit_uses /
// implicit_defs), one line per LLVM opcode:
//   NAME <tab> uses R1 R2 ... <tab> defs R3 ...
// Built and run by tools/gen_isa_tables.py --implicit against libLLVM-16.
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include <memory>
#include <string>

using namespace llvm;

int main() {
  InitializeAllTargetInfos();
  InitializeAllTargetMCs();
  std::string err;
  const char *triple = "amdgcn-amd-amdhsa";
  const Target *T = TargetRegistry::lookupTarget(triple, err);
  if (!T) {
    errs() << "error: " << err << "\n";
    return 1;
  }
  std::unique_ptr<MCInstrInfo> MII(T->createMCInstrInfo());
  std::unique_ptr<MCRegisterInfo> MRI(T->createMCRegInfo(triple));
  for (unsigned op = 0; op < MII->getNumOpcodes(); ++op) {
    const MCInstrDesc &D = MII->get(op);
    outs() << MII->getName(op) << "\tuses";
    for (MCPhysReg r : D.implicit_uses())
      outs() << " " << MRI->getName(r);
    outs() << "\tdefs";
    for (MCPhysReg r : D.implicit_defs())
      outs() << " " << MRI->getName(r);
    outs() << "\n";
  }
  return 0;
}
