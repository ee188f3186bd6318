#if defined(__x86_64__) || defined(__i386__)
#define LUMOS_FPCR_GET() __builtin_ia32_stmxcsr()
#define LUMOS_FPCR_SET(x) __builtin_ia32_ldmxcsr(x)
#define LUMOS_FPCR_FLUSH 0x8040u
#elif defined(__aarch64__)
#define LUMOS_FPCR_GET() __builtin_aarch64_get_fpcr()
#define LUMOS_FPCR_SET(x) __builtin_aarch64_set_fpcr(x)
#define LUMOS_FPCR_FLUSH (1u << 24)
#endif
#ifdef LUMOS_FPCR_FLUSH
static __thread unsigned lumos_fpcr;
static __thread int lumos_fpcr_held;
static void lumos_flush_denormals(int on) {
  #pragma omp parallel num_threads(lumos_threads())
  if (on && !lumos_fpcr_held) {
    lumos_fpcr = LUMOS_FPCR_GET();
    LUMOS_FPCR_SET(lumos_fpcr | LUMOS_FPCR_FLUSH);
    lumos_fpcr_held = 1;
  } else if (!on && lumos_fpcr_held) {
    LUMOS_FPCR_SET(lumos_fpcr);
    lumos_fpcr_held = 0;
  }
}
#else
static void lumos_flush_denormals(int on) { (void)on; }
#endif
