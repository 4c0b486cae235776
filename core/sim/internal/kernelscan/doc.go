// Package kernelscan reads the declarations of CUDA C++ source without
// compiling it: enough for the simulated device to refuse, as NVRTC would,
// an entry the source does not define as a __global__ function, a
// parameter list whose count or pointer/scalar kinds differ from the ones a
// caller declares, and text whose braces, brackets or parentheses do not
// balance.
//
// It is a scanner, not a compiler. Comments, string and character literals
// (raw strings included) are skipped; preprocessor lines are read for
// #include of the headers given as strings, object-like #define and #undef
// (expanded where they are used, the -D defines included), and conditional
// blocks (of each #if chain the first branch is read, or the #else of an
// #if 0). Declarations are found by their tokens: namespaces, extern "C"
// blocks, template parameter lists, typedef and using aliases (a pointer
// alias makes a pointer parameter), and __global__ functions with their
// attributes (__launch_bounds__ and the like) skipped.
//
// It does not check types beyond pointer or scalar, expressions, statements,
// overload resolution, identifiers used in bodies, function-like macros, or
// #if conditions; what it does not understand it accepts, so the only
// refusals are the ones described above.
package kernelscan
